"""Management layer: the kind or adopted cluster, the image cache, Kamaji and its data store."""
