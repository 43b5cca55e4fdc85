"""The reference for each exercise: the same names and signatures as exercises/ (see minicb/course.py)."""
