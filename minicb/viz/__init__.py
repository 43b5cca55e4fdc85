"""Views of a trace. Each is a pure function of the trace; widgets are thin wrappers over them."""
