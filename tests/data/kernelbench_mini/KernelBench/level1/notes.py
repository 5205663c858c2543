# Not a task: the name is not <N>_<Name>.py, so the importer skips it.
