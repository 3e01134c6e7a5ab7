"""Public ops: one thin documented function per op -> validation -> backend dispatch."""
