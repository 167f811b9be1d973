"""Models built from a config: the ConfiguredModel contract (configured) and reading an archive as a
given model class (read). `zarchive.torchutil` is the public front."""
