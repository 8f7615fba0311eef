"""What both services stand on: kernels (more to move here, see issue 13)."""
