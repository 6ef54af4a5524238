"""dead_letters"""

ENDPOINTS: list = []
