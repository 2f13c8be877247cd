"""The one training loop of gradient-trained detectors (bench.training.loop) and the replay buffer
(bench.training.replay) shared by every continual protocol that replays past images."""
