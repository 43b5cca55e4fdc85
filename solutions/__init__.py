"""The reference for each exercise: the same names and signatures as exercises/ (see minicb/course/__init__.py)."""
