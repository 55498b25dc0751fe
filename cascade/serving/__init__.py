"""Serving the engine to the page and to the API alike: the shared engine pool (loading, warm-up, leasing),
the one event pump from a generation's thread to its reader, the process's settings, and the words a
visitor is told."""
