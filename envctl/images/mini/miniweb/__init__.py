"""miniweb: the small web application shared by envctl's mini-flavor stand-in sites.

One Flask app per site (``miniweb.sites.<site>``) on a shared core (:mod:`miniweb.core`):
database access for MariaDB and PostgreSQL, server-side sessions stored in the site's own
database (so a recreated container knows no old cookie), a page layout, and a process
supervisor (:mod:`miniweb.supervise`) that runs the database and the app in one container
and shuts both down cleanly on SIGTERM.
"""
