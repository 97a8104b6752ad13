"""The performance benchmarks: ``latency`` (search at growing store sizes), ``scale`` (many users, large stores),
``growth`` (recall as a store grows), ``encoder_speed`` (the encoder's backends), and the benches of the optional
parts: ``roles``, ``sensory`` and ``ltm``."""
