"""Developer tools that write product files (run from the project root: ``python -m tools.<name>``)."""
