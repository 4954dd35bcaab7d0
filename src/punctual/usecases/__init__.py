"""What punctual does, one module per family; takes ports and `now`, never adapters."""
