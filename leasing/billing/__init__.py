"""Money and usage: the one price rule (prices), usage records where a holding ends (usage),
reports, exports, statements and their charts."""
