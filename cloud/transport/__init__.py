"""Transport: MQTT clients and sessions, topic names and the broker's packet limit, the serial port, the serial gateway.
May import: no other role.
"""
