"""The machine-learning toolkit every lesson shares: data sets, models, optimisers, training loop."""
