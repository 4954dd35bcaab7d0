"""The process part that keeps time: dispatch passes, wake-ups, the reaper."""
