"""What the page and the API share: the engine pool, the event pump, the process's settings, a visitor's words."""
