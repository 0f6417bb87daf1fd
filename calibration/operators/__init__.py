"""GPU profiles from measured operator timings (Vidur's CSV format): readers that check
every row, the fit of the GPU cost form's constants, and its judgment on held-out models
and TP degrees (docs/calibration.md, "GPU profiles")."""
