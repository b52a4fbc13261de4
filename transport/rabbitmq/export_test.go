package rabbitmq

// SeverConnection closes the socket under s's current connection, as a
// network failure would.
func SeverConnection(s *Subscriber) error { return s.dialer.sever() }

// SeverPublisher closes the socket under p's current connection.
func SeverPublisher(p *Publisher) error { return p.dialer.sever() }
