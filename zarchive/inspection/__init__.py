"""Looking inside archives without changing them: tensor statistics (`stats`) and what changed
between two archives (`diff`)."""
