"""Pure functions behind the losses: tensors in, tensors out, no state, no proxies held."""

from retrieval.losses.functional.pair import *  # noqa: F403
from retrieval.losses.functional.pair import __all__ as _pair_all
from retrieval.losses.functional.proxy import *  # noqa: F403
from retrieval.losses.functional.proxy import __all__ as _proxy_all

__all__ = [*_proxy_all, *_pair_all]
