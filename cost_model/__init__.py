"""How good a candidate looks: program features, rankers, their training data and metrics, and the
draft-then-verify policy that scores candidates for a search."""

from .base import CostModel
from .dataset import Dataset, records_to_dataset, split_by_workload
from .draft import draft_features, draft_score
from .features import FEATURE_NAMES, FeatureExtractor
from .lightgbm_ranker import LightGBMRanker
from .metrics import dataset_metrics, ranking_metrics
from .models import MODELS, make_model
from .pretrained import has_pretrained, load_pretrained
from .scoring import DraftThenVerify
from .torch_ranker import TorchRanker
from .training import TrainingData

__all__ = ["CostModel", "Dataset", "records_to_dataset", "split_by_workload", "draft_features", "draft_score",
           "FEATURE_NAMES", "FeatureExtractor", "LightGBMRanker", "TorchRanker", "dataset_metrics",
           "ranking_metrics", "load_pretrained", "has_pretrained", "MODELS", "make_model", "DraftThenVerify",
           "TrainingData"]
