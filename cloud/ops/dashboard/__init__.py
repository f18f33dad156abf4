"""``dpsense dashboard``: a read-only live view of the analyst's store and Prometheus metrics.

``data`` holds the one interface every page element and metric is read through
(``DashboardSource``) and its implementation over the analyst's store; ``server`` the HTTP
side, ``page`` the page, ``metrics`` the Prometheus collector.
"""
