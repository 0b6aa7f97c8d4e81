"""Faults and abuse: a real server under kills, floods and hostile users; nothing may be lost."""
