import pytest
from torch import nn


@pytest.fixture
def simple_model():
    """The Sequential AITune's inspecting, wrapping and module-info tests share: Linear(10, 20), ReLU,
    Linear(20, 5)."""
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
