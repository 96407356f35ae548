"""What the broker, its clients and its workers share on the wire: body encodings, the error
mapping, leased pages and which writer answered."""
