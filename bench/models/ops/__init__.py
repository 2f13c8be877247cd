"""Small reusable tensor ops shared by the detectors."""
