# (filled by the ff_weights work)
