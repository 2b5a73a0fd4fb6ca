"""Ray engine tests: each run starts a local Ray instance with 2 worker actors and stops it (the
`ray` package comes with the dev extra)."""
