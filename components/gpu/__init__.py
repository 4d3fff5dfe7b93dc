"""GPU layer: HAMi, the cards per node and the smoke-test proof."""
