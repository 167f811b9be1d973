"""Looking inside archives: what changed between two of them (diff), statistics of their values for
the viewer (stats). Everything here reads through the public lazy open (`zarchive.open`), under each
file's read budget, and builds no class the file names."""
