"""Pure rules: state machines, time arithmetic, policies, permissions. No I/O, no clock."""
