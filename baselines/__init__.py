"""dlsched.baselines: the papers' schedulers as handcrafted policies, built by name.

::

    from dlsched import baselines

    policy = baselines.make("dqoes", beta=0.2)
    baselines.names()
    # ('default', 'equal', 'dqoes', 'flowcon', 'specon', 'tradl', 'autothrottle',
    #  'k8s-autoscaler', 'oracle')
"""

from dlsched.baselines.registry import baseline_class, defaults, make, names

__all__ = ["baseline_class", "defaults", "make", "names"]
