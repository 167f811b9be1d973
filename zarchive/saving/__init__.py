"""Saving: writing a planned save (write), checking it is readable (check), background saves and their
staging buffer (background, staging), the metadata member, and progress bars. Internal: the public
names are re-exported by `zarchive` (and `zarchive.staging`)."""
