"""Pure functions behind the losses: tensors in, tensors out, no state, no proxies held."""

from retrieval.losses.functional.asymmetric import *  # noqa: F403
from retrieval.losses.functional.asymmetric import __all__ as _asymmetric_all
from retrieval.losses.functional.focal import *  # noqa: F403
from retrieval.losses.functional.focal import __all__ as _focal_all
from retrieval.losses.functional.gating import *  # noqa: F403
from retrieval.losses.functional.gating import __all__ as _gating_all
from retrieval.losses.functional.margins import *  # noqa: F403
from retrieval.losses.functional.margins import __all__ as _margins_all
from retrieval.losses.functional.pair import *  # noqa: F403
from retrieval.losses.functional.pair import __all__ as _pair_all
from retrieval.losses.functional.proxy import *  # noqa: F403
from retrieval.losses.functional.proxy import __all__ as _proxy_all

__all__ = [*_proxy_all, *_margins_all, *_gating_all, *_focal_all, *_asymmetric_all, *_pair_all]
