"""Serial gateway: framed lines from a board's UART -> the broker, under the device's account.

    dpsense gateway --port /dev/ttyACM0 --device-id 7          # or a QEMU pty

Boards without a network (micro:bit, Pico over USB) write each record as one framed
line (docs/protocol.md 2); the gateway publishes it unchanged with QoS 1, logged in to
the broker as the device itself (``d<N>``), so the broker's ACL and the ingest checks
see exactly what a networked board would send. Once the broker has both messages of a
record, the board learns so when it polls (docs/protocol.md 2.1), and may forget it.

The parts, one concept each:

    relay.py     Gateway: lines in (records, console, polls, events), publishes out
    acks.py      which records the broker has, and the answers to the board's polls
    events.py    the micro:bit's event lines (docs/protocol.md 2.2) in the full firmware's words
    service.py   run(): the serial port (cloud/transport/serialport.py) and the MQTT client around a Gateway
"""
