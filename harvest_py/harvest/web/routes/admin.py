"""admin"""

ENDPOINTS: list = []
