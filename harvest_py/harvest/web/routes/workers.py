"""workers"""

ENDPOINTS: list = []
