# (filled by the ff_route work)
