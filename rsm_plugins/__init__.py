"""Remote storage plugins (Kafka's RemoteStorageManager): ``local``, ``s3``, ``fsspec`` and a loader.

``rsm_plugins.load("s3", {...})`` returns a configured plugin; see :mod:`rsm_plugins.api` for the
interface and :mod:`rsm_plugins.testing` for the contract kit every plugin runs. Importing this
package does not import boto3 or fsspec; a plugin's module is imported when it is loaded.
"""

from .api import RemoteStorageManager
from .loading import ENTRY_POINT_GROUP, available, load, resolve

__all__ = ["ENTRY_POINT_GROUP", "RemoteStorageManager", "available", "load", "resolve"]
