"""A what-if cluster simulator: Pulsar's in-broker shedding and this product's offline plans on the
same simulated traffic, so a reviewer can see what a strategy would do before approving it, and the
project can back its claims about the strategies with numbers."""
