"""drytune: static auto-scheduling of tensor programs."""
