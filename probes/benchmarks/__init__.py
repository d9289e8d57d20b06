"""The data side of probing: benchmark formats and registry, the built-in grammar and its generator,
vocabularies, minimal-pair records, slot alignment and the phrase-region groupings."""
