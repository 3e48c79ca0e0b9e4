"""torch.distributions, as far as kiln has it: Normal, Uniform, Bernoulli, Categorical,
MultivariateNormal and Independent, with constraints, argument and sample validation,
and kl_divergence for the pairs PyTorch registers among them.

Written in eager ops, so log_prob, entropy, kl_divergence and rsample (reparameterised
where PyTorch's is: Normal, Uniform, MultivariateNormal) carry gradients to the
parameters. MultivariateNormal's Cholesky factor and triangular solves are
autograd.Functions over numpy (distributions/_linalg.py)."""
from eager.distributions import constraints
from eager.distributions.bernoulli import Bernoulli
from eager.distributions.categorical import Categorical
from eager.distributions.distribution import Distribution
from eager.distributions.independent import Independent
from eager.distributions.kl import kl_divergence, register_kl
from eager.distributions.multivariate_normal import MultivariateNormal
from eager.distributions.normal import Normal
from eager.distributions.uniform import Uniform

__all__ = ["Bernoulli", "Categorical", "Distribution", "Independent", "MultivariateNormal",
           "Normal", "Uniform", "constraints", "kl_divergence", "register_kl"]
