"""The course as a static website (``make site``): ``build.py`` runs Sphinx, ``pages.py``
writes its pages, ``panels.py`` makes the widgets of executed lessons static."""
from ddl_lab.tools.site.build import Launch, build, stale_lessons
from ddl_lab.tools.site.panels import SiteError

__all__ = ["Launch", "SiteError", "build", "stale_lessons"]
