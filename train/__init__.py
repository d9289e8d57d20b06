"""Everything that makes checkpoints: model, data, loop, engines, schedule, hook dispatch."""
