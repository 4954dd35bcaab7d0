"""One-off scheduled starts and their dispatch into runs (OS-*, DP-*)."""
