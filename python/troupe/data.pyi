# Type stubs of troupe.data (docs/reference/python.md).
from typing import Any, Callable, Iterable, Optional, Tuple

import numpy as np

class _Given: ...

def arrays(x_train: Any, y_train: Any, x_test: Any = ..., y_test: Any = ...) -> _Given: ...
def iterable(fn: Callable[[int], Iterable[Tuple[Any, Any]]], *, classes: int,
             steps_per_epoch: Optional[int] = ...,
             test: Optional[Tuple[np.ndarray, np.ndarray]] = ...) -> _Given: ...
