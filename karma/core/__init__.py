"""The lowest layer: user-facing errors, whole-file writes, hardware presets, precision and the
storages of tensors, which every other package reads."""
