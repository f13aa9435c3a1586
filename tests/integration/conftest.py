"""The headless Chromium of the admin browser test, for every browser test of this folder."""

from __future__ import annotations

from tests.integration.test_admin_browser import browser

__all__ = ["browser"]
