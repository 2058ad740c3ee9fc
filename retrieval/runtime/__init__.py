"""Process runtime: the device, the torchrun process group, environment facts and atomic file writes."""
