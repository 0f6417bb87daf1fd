"""What is served and on what: a model's shape (spec.py, read from any config.json by
config_json.py, presets by name in presets.py and presets/models/), the GPU catalogue
(hardware.py, presets/hardware.toml) and how one replica is laid out over GPUs (layout.py)."""
