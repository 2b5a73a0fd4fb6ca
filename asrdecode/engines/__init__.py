"""Where a run decodes besides the calling process: `ray` (worker actors on a Ray cluster)."""
