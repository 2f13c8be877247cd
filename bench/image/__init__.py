"""The image track: its track object, registered in bench.tracks (track.py); its data, features and detectors
are bench.data, bench.features and bench.models."""
