package archive

import "github.com/google/uuid"

// SetAfterPut makes fn run between an archive's upload and its mark: an
// error from fn is a crash at the worst moment.
func SetAfterPut(a *Archiver, fn func(taskID uuid.UUID) error) { a.afterPut = fn }
