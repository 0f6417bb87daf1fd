"""The calibrate command's jobs beyond the backend sweep (experiments/commands/calibrate.py
parses and dispatches; calibration/ fits):

replay_options.py   the options of --from-replay and --endpoint
from_replay.py      --from-replay: read the timings, resolve the prior and the engine's
                    settings, fit, print the report
endpoint.py         --endpoint: send the designed probes to a server, keep them as replay
                    folders, then fit them as --from-replay does"""
