"""Your code for the course: one file per lesson, stubs until you fill them in (see minicb/course/__init__.py)."""
