"""Video of chosen envs of any vector env, the public path: ``from vecenv.video import RecordVideo``.

The implementation is :mod:`vecenv.integrations.video`; imageio is imported only when a writer
is made.
"""

from vecenv.integrations.video import RecordVideo, VideoWriter, capped_cubic, every, imageio_writer

__all__ = ["RecordVideo", "VideoWriter", "every", "capped_cubic", "imageio_writer"]
